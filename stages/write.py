#!/usr/bin/env python3
"""Write task: write the shards of one row range into OUT.tmp, with a receipt."""
import _common

if __name__ == "__main__":
    _common.main("write")

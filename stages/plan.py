#!/usr/bin/env python3
"""Plan job: fix the global order and the row range of every output shard."""
import _common

if __name__ == "__main__":
    _common.main("plan")

#!/usr/bin/env python3
"""Finalize job: check receipts against plan and disk, write _MANIFEST.json, swap OUT into place."""
import _common

if __name__ == "__main__":
    _common.main("finalize")

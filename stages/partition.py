#!/usr/bin/env python3
"""Partition task: stream input shards, hash and split every document, spill sorted bucket sections."""
import _common

if __name__ == "__main__":
    _common.main("partition")

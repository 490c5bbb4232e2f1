"""What runs where the work is done: one task of a stage, the C units of an array task, a language landing.

Above `stages/` (it calls them) and below `submit/` (whose executors start it); `run/` below both is
the run directory's model, which every layer reads.
"""

"""Faults, kills and resumes: a run that meets one ends in the bytes of an uninterrupted run, or in a named next step."""

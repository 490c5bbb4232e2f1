"""What OUT holds and who reads it: readers, publish, replacing OUT, splits, cards, annotations."""

"""The four stages (partition, plan, write, finalize) and the intermediate data they hand each other."""

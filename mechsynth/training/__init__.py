"""Training: the loop (`train`), seeds side by side (`seeds`), a fixed training set (`fixed_set`), the memory
estimate (`budget`), and training into a run directory, new or continued (`runner`)."""

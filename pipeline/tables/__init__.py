"""A released table read back with pyarrow and datasets alone, no Beam, spaCy or NLTK (what the trainer and
evaluator need): shards.py (shard names, bytes, checked reads, sha256), folders.py (the tables of a run folder or a
published folder, checked against their report or manifest), load.py (load_table). pipeline/io/ writes with it."""

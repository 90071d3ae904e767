"""The results layer: extraction, loading, metrics, tables, plots; imports only the leaves.

Results and training meet only on disk (tags, event files, metadata.json, complete.json).
"""

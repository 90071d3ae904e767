"""What the Snakemake workflow runs besides the trainer and the report (docs/architecture.md)."""

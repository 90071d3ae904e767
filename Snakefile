# sacbench: CleanRL's SAC benchmark as a pipeline. A table of contents; the rules live in
# workflow/rules/, one file per stage, and their helpers in workflow/rules/common.smk.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


# Validates config.yaml against workflow/schemas/config.schema.yaml before any job starts.
include: "workflow/rules/common.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/extract.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/plots.smk"
include: "workflow/rules/videos.smk"


rule all:
    default_target: True
    input:
        all_targets,

# The result tables, each from the extracted runs of the whole config (variants are columns).
# Local rules: on a cluster they run on the submit host; only training is submitted.
localrules:
    runtimes_table,
    returns_table,
    aggregate_table,


rule runtimes_table:
    input:
        tables=extracted_tables,
        summaries=extracted_summaries,
    output:
        md=report(
            results("sac_runtimes.md"),
            caption="../report/sac_runtimes.rst",
            category="Tables",
        ),
        csv=results("sac_runtimes.csv"),
    log:
        results("logs/tables/sac_runtimes.log"),
    conda:
        "../../envs/report.yaml"
    params:
        extracted_dir=extracted_dir,
        selection=selection_flags(),
        allow_missing=allow_missing_flag(),
    shell:
        "python -m sacbench.report runtimes --extracted-dir {params.extracted_dir}"
        " {params.selection} --md {output.md} --csv {output.csv} {params.allow_missing}"
        " > {log} 2>&1"


rule returns_table:
    input:
        tables=extracted_tables,
        summaries=extracted_summaries,
    output:
        md=report(
            results("sac.md"),
            caption="../report/sac.rst",
            category="Tables",
        ),
        csv=results("sac.csv"),
    log:
        results("logs/tables/sac.log"),
    conda:
        "../../envs/report.yaml"
    params:
        extracted_dir=extracted_dir,
        selection=selection_flags(),
        last_episodes=config["report"]["last_episodes"],
        bootstrap_resamples=config["report"]["bootstrap_resamples"],
        bootstrap_seed=config["report"]["bootstrap_seed"],
        allow_missing=allow_missing_flag(),
    shell:
        "python -m sacbench.report returns --extracted-dir {params.extracted_dir}"
        " {params.selection} --md {output.md} --csv {output.csv}"
        " --last-episodes {params.last_episodes}"
        " --bootstrap-resamples {params.bootstrap_resamples}"
        " --bootstrap-seed {params.bootstrap_seed} {params.allow_missing} > {log} 2>&1"


rule aggregate_table:
    input:
        tables=extracted_tables,
        summaries=extracted_summaries,
    output:
        md=report(
            results("sac_aggregate.md"),
            caption="../report/sac_aggregate.rst",
            category="Tables",
        ),
        csv=results("sac_aggregate.csv"),
    log:
        results("logs/tables/sac_aggregate.log"),
    conda:
        "../../envs/report.yaml"
    params:
        extracted_dir=extracted_dir,
        selection=selection_flags(),
        last_episodes=config["report"]["last_episodes"],
        bootstrap_resamples=config["report"]["bootstrap_resamples"],
        bootstrap_seed=config["report"]["bootstrap_seed"],
        allow_missing=allow_missing_flag(),
    shell:
        "python -m sacbench.report aggregate --extracted-dir {params.extracted_dir}"
        " {params.selection} --md {output.md} --csv {output.csv}"
        " --last-episodes {params.last_episodes}"
        " --bootstrap-resamples {params.bootstrap_resamples}"
        " --bootstrap-seed {params.bootstrap_seed} {params.allow_missing} > {log} 2>&1"

# The result tables, each from the extracted runs of the whole config (variants are columns).
# One rule per table, all from TABLE_RULES: they differ only in the report command, the output
# stem and whether the command takes the statistics flags.


# report command -> (output stem under results/, extra flags); the rule is "{command}_table".
TABLE_RULES = {
    "runtimes": ("sac_runtimes", ""),
    "returns": ("sac", statistics_flags()),
    "aggregate": ("sac_aggregate", statistics_flags()),
}

for command, (stem, options) in TABLE_RULES.items():

    # Local rules: on a cluster they run on the submit host; only training is submitted.
    rule:
        name:
            f"{command}_table"
        input:
            tables=extracted_tables,
            summaries=extracted_summaries,
        output:
            md=report(
                results(f"{stem}.md"),
                caption=f"../report/{stem}.rst",
                category="Tables",
            ),
            csv=results(f"{stem}.csv"),
        log:
            results(f"logs/tables/{stem}.log"),
        localrule: True
        conda:
            "../../envs/report.yaml"
        params:
            command=command,
            options=options,
            extracted_dir=extracted_dir,
            selection=selection_flags(),
            allow_missing=allow_missing_flag(),
        shell:
            "python -m sacbench.report {params.command} --extracted-dir {params.extracted_dir}"
            " {params.selection} --md {output.md} --csv {output.csv} {params.options}"
            " {params.allow_missing} > {log} 2>&1"

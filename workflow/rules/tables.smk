# The result tables, each from the extracted runs of the whole config (variants are columns).
# One rule per table, all from TABLE_RULES: they differ only in the report command, the output
# stem, its label in the report and whether the command takes the statistics flags. Each table is
# written as markdown, CSV and an HTML page of the markdown: Snakemake's report shows HTML inline
# but offers markdown and CSV only as downloads, so the page is what it shows, with the markdown
# and the CSV attached beside it.


# report command -> (output stem under results/, label in the report, extra flags); the rule is
# "{command}_table".
TABLE_RULES = {
    "runtimes": ("sac_runtimes", "throughput and wall-clock", ""),
    "returns": ("sac", "episodic returns", statistics_flags()),
    "aggregate": ("sac_aggregate", "aggregate statistics", statistics_flags()),
}

for command, (stem, label, options) in TABLE_RULES.items():

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
                labels={"table": f"{stem} ({label})", "format": "markdown (download)"},
            ),
            csv=report(
                results(f"{stem}.csv"),
                caption=f"../report/{stem}.rst",
                category="Tables",
                labels={"table": f"{stem} ({label})", "format": "CSV (download)"},
            ),
            page=report(
                results(f"{stem}.html"),
                caption=f"../report/{stem}.rst",
                category="Tables",
                labels={"table": f"{stem} ({label})", "format": "HTML (shown here)"},
            ),
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
            " {params.selection} --md {output.md} --csv {output.csv} --html {output.page}"
            " {params.options} {params.allow_missing} > {log} 2>&1"

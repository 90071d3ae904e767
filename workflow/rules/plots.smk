# Learning curves and throughput: one panel per env, one curve (mean +- std over seeds) per
# variant; the evaluation returns when the runs evaluate; the aggregate statistics as rliable draws
# them (IQM and mean with their 95% CIs, and the performance profile, from the normalised scores of
# sac_aggregate.md with the same flags, so the same numbers) when some task has a published pr-424
# return. common.smk's plot_names() says which.
# A local rule: on a cluster it runs on the submit host; only training is submitted.
localrules:
    plots,


rule plots:
    input:
        tables=extracted_tables,
        summaries=extracted_summaries,
    output:
        **plot_outputs(),
    log:
        results("logs/plots/plots.log"),
    conda:
        "../../envs/report.yaml"
    params:
        extracted_dir=extracted_dir,
        out_dir=plots_dir,
        selection=selection_flags(),
        statistics=statistics_flags(),
        allow_missing=allow_missing_flag(),
        figures=" ".join(plot_names()),
    shell:
        "python -m sacbench.report plots --extracted-dir {params.extracted_dir}"
        " {params.selection} --out-dir {params.out_dir} --figures {params.figures}"
        " {params.statistics} {params.allow_missing} > {log} 2>&1"

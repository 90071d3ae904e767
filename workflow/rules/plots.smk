# Learning curves and throughput: one panel per env, one curve (mean +- std over seeds) per variant.
# A local rule: on a cluster it runs on the submit host; only training is submitted.
localrules:
    plots,


rule plots:
    input:
        tables=extracted_tables,
        summaries=extracted_summaries,
    output:
        returns=report(
            results("plots/sac.png"),
            caption="../report/sac_plot.rst",
            category="Plots",
        ),
        returns_by_time=report(
            results("plots/sac-time.png"),
            caption="../report/sac_time_plot.rst",
            category="Plots",
        ),
        sps=report(
            results("plots/sac-sps.png"),
            caption="../report/sac_sps_plot.rst",
            category="Plots",
        ),
        returns_svg=results("plots/sac.svg"),
        returns_by_time_svg=results("plots/sac-time.svg"),
        sps_svg=results("plots/sac-sps.svg"),
    log:
        results("logs/plots/plots.log"),
    conda:
        "../../envs/report.yaml"
    params:
        extracted_dir=extracted_dir,
        out_dir=plots_dir,
        selection=selection_flags(),
        allow_missing=allow_missing_flag(),
        figures=" ".join(PLOT_NAMES),
    shell:
        "python -m sacbench.report plots --extracted-dir {params.extracted_dir}"
        " {params.selection} --out-dir {params.out_dir} --figures {params.figures}"
        " {params.allow_missing} > {log} 2>&1"


# Evaluation return against global step; built when the runs evaluate (common.smk's
# evaluation_targets). A local rule, as the others.
localrules:
    eval_plot,


rule eval_plot:
    input:
        tables=extracted_tables,
        summaries=extracted_summaries,
    output:
        evaluation=report(
            results(f"plots/{EVAL_PLOT_NAME}.png"),
            caption="../report/sac_eval_plot.rst",
            category="Plots",
        ),
        evaluation_svg=results(f"plots/{EVAL_PLOT_NAME}.svg"),
    log:
        results("logs/plots/eval_plot.log"),
    conda:
        "../../envs/report.yaml"
    params:
        extracted_dir=extracted_dir,
        out_dir=plots_dir,
        selection=selection_flags(),
        allow_missing=allow_missing_flag(),
        figure=EVAL_PLOT_NAME,
    shell:
        "python -m sacbench.report plots --extracted-dir {params.extracted_dir}"
        " {params.selection} --out-dir {params.out_dir} --figures {params.figure}"
        " {params.allow_missing} > {log} 2>&1"


# The aggregate statistics as rliable draws them: IQM and mean with their 95% CIs, and the
# performance profile, from the normalised scores of sac_aggregate.md (the same flags, so the
# same numbers); built when some task has a published pr-424 return (common.smk's
# aggregate_plot_targets). A local rule, as the others.
localrules:
    aggregate_plots,


rule aggregate_plots:
    input:
        tables=extracted_tables,
        summaries=extracted_summaries,
    output:
        intervals=report(
            results(f"plots/{AGGREGATE_PLOT_NAMES[0]}.png"),
            caption="../report/sac_aggregate_plot.rst",
            category="Plots",
        ),
        profile=report(
            results(f"plots/{AGGREGATE_PLOT_NAMES[1]}.png"),
            caption="../report/sac_profile_plot.rst",
            category="Plots",
        ),
        intervals_svg=results(f"plots/{AGGREGATE_PLOT_NAMES[0]}.svg"),
        profile_svg=results(f"plots/{AGGREGATE_PLOT_NAMES[1]}.svg"),
    log:
        results("logs/plots/aggregate_plots.log"),
    conda:
        "../../envs/report.yaml"
    params:
        extracted_dir=extracted_dir,
        out_dir=plots_dir,
        selection=selection_flags(),
        statistics=statistics_flags(),
        allow_missing=allow_missing_flag(),
        figures=" ".join(AGGREGATE_PLOT_NAMES),
    shell:
        "python -m sacbench.report plots --extracted-dir {params.extracted_dir}"
        " {params.selection} --out-dir {params.out_dir} --figures {params.figures}"
        " {params.statistics} {params.allow_missing} > {log} 2>&1"

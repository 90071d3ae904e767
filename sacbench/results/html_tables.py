"""A table's markdown as an HTML page, for the Snakemake report.

Snakemake's report viewer shows images, HTML and PDF inline but offers any other file, a
markdown table included, only as a download. `report runtimes|returns|aggregate --html OUT`
writes, beside the .md and .csv, this page: the same markdown rendered by Python-Markdown
(its `tables` extension), every section, definition, note and the provenance with it, so the
report shows each table where it lists it.
"""

from __future__ import annotations

import html

import markdown

# Plain, readable tables: ruled cells, numbers right-aligned as the markdown asks.
_STYLE = (
    "body { font-family: sans-serif; margin: 1em; line-height: 1.4; } "
    "table { border-collapse: collapse; margin: 0.5em 0 1.2em; } "
    "th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; } "
    "th { background: #f3f3f3; } tbody tr:nth-child(even) { background: #fafafa; } "
    "code { font-size: 95%; }"
)


def page_title(markdown_text: str) -> str:
    """The table's title: its first "# " heading."""
    for line in markdown_text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise ValueError("the table's markdown has no '# ' title line")


def table_page(markdown_text: str) -> str:
    """A self-contained HTML page showing the markdown table file ``markdown_text``."""
    title = page_title(markdown_text)
    body = markdown.markdown(markdown_text, extensions=["tables"], output_format="html")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"{body}\n</body>\n</html>\n"
    )

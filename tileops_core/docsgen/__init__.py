"""Generated documentation: the support matrix and one reference page per op (Markdown and HTML)."""

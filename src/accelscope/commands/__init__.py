"""One home per command: each package holds its request and workflow, terminal views, HTML
renderer and template. ``_lifecycle`` is the plumbing every command shares. A command package
never imports another one (the layering test enforces it)."""

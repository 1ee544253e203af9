"""Workflows: one module per command that joins an analysis to the store and the reports.

Each takes a typed request, validates every user input up front (one-line ``BadInputError``),
runs the analysis (layer 8), commits results to the store and writes the report. The CLI calls
these; so can Python code.
"""

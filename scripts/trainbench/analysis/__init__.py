"""The analysis side: records to tables, statistics, figures and reports."""

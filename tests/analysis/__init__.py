"""The analysis scripts run as a user runs them (a subprocess, tiny settings), and their result
tables are resumable: an interrupted run keeps its finished points, a re-run measures only the
missing ones, and resuming with other settings stops with a message naming them. One file per
script, so that the test workers share the long runs between them."""

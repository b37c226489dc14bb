"""What violations become: the JSON-lines log and stderr lines, triage into ranked groups,
and the HTML report."""

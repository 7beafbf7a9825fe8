"""What the sweep service (sweeper/) and the trainer (trainables/) both need, and nothing else:
a user's mistake as one bounded line (errors.py) and a file written whole or not at all
(files.py). Stdlib only; it imports neither of them.
"""

"""`python -m sweeper`: the `sweeper` command, where it is not installed as one."""

from sweeper.cli import main

raise SystemExit(main())

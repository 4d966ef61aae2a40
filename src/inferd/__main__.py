"""`python -m inferd` is `inferd`."""

from inferd.cli.main import main

raise SystemExit(main())

from gnnpipe.cli import main

raise SystemExit(main())

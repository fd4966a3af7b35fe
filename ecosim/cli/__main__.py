from ecosim.cli import main

raise SystemExit(main())

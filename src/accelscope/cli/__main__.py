"""``python -m accelscope.cli``."""

from accelscope.cli._main import main

raise SystemExit(main())

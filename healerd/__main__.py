import sys

from healerd.daemon.main import main

sys.exit(main())

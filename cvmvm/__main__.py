import sys

from cvmvm.cli.launch import main

sys.exit(main())

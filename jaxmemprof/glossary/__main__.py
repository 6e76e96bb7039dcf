"""``python -m jaxmemprof.glossary``: write (or ``--check``) docs/columns.md and docs/glossary.md."""

import sys

from jaxmemprof.glossary.docs import main

sys.exit(main())

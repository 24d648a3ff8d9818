"""The test suite's helpers, in the checkout only (not in the wheel): seeded random-weight GGUFs
of every MTP family (``fixtures``), hosts on one machine for the multi-host tests (``hosts``),
an HTTP load driver for the server (``server_load``) and a float64 reference sampler
(``reference_sampling``).

pytest puts ``tests/`` on the import path (pyproject.toml, ``pythonpath``); scripts in
``tools/`` do the same. The bench's own models (the deep variant, echo models, padded
vocabularies) are runtime code: ``pymtp.bench``."""

"""Models for tests, yours included: seeded random-weight GGUFs of every MTP family
(``pymtp.testing.fixtures``) and the deep benchmark variant (``pymtp.testing.deep``).
Nothing in the runtime imports this package."""

"""The unit harness, in one place: the fake engine, builders, and every helper that more
than one test module uses. Test modules import from here, never from one another
(tests/unit/test_house_rules.py holds that)."""

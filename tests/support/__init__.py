"""Test support shared by unit, integration and property tests."""

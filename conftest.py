"""Root conftest: the fixtures every test and suite can ask for."""

pytest_plugins = ["fixtures.harness", "fixtures.chaos"]

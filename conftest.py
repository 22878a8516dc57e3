"""Root conftest: the fixtures every test and suite can ask for."""

pytest_plugins = ["fixtures.lab", "fixtures.harness", "fixtures.chaos"]

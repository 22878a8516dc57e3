"""Node chaos: kill and start a node through the provider, drain and cordon through the API."""

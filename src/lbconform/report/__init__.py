"""What a run reports: the conformance report, the datasheet, and Allure's labels and files.

``model`` holds the values and the ``user_properties`` keys tests carry; ``collector`` is the
pytest plugin that gathers them; ``conformance``, ``datasheet`` and ``allure`` write them out;
``schema`` checks a report. Import the modules themselves: this package imports nothing, so
that the pytest plugin can use ``model`` without loading the writers.
"""

"""What a run reports: the conformance report, the datasheet, and Allure's labels and files.

``model`` holds the values and the ``user_properties`` keys tests carry; ``collector`` is the
pytest plugin that gathers them; ``conformance``, ``datasheet`` and ``allure`` write them out;
``evidence`` writes what a report is built from beside it and checks the report against it
(``compare`` says how they differ); ``schema`` checks a report's shape; ``submit`` files a verified
report for a repository of reports. Import the modules themselves: this package imports nothing, so
that the pytest plugin can use ``model`` without loading the writers.
"""

"""chaostoolkit actions and probes of lbconform, and the runner the suites call.

Laid out as chaostoolkit-kubernetes is: one subpackage per resource (``node``, ``kubeproxy``,
``deployment``, ``backend``, ``traffic``), each with ``actions.py`` and/or ``probes.py``.
Kubernetes changes that chaostoolkit-kubernetes already makes (drain, cordon, rollout,
scale, pod termination) are its own functions; what it cannot do (kill a node, restart one
node's kube-proxy) goes through the lbconform provider. ``guard`` keeps disruptive actions
to the nodes an experiment names, and off unless ``allow_disruptive`` is set.

Configuration keys the experiments share (``chaos run --var KEY=VALUE`` overrides them):

- ``lbconform_provider``: the provider that kills nodes and restarts kube-proxy (``lab``).
- ``lbconform_provider_options``: its ``--provider-option`` values, ``NAME=VALUE,NAME=VALUE``.
- ``lbconform_provider_mode``: its ``--mode``, if the run has one.
- ``lbconform_declaration``: the path of the run's ``--declaration`` file, if any.
- ``allow_disruptive``: false unless the user allows node-touching experiments.
- ``allowed_nodes``: the nodes the experiment may touch, comma-separated.

The Kubernetes API is the one ``$KUBECONFIG`` names (chaostoolkit-kubernetes reads the same).
"""

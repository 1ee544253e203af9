"""The modules that run inside the user's process (the instrumented child of ``accelscope doctor``
and API mode's ``watch``): torch patches, the step recorder, injected what-ifs, device events.
Everything else in ``accelscope.doctor`` runs in accelscope's own process."""

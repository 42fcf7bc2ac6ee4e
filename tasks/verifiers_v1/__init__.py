"""The ``verifiers:`` bridge: Prime Intellect's Verifiers v1 tasksets as envhub envs (:mod:`.env`)."""

"""The platform resource: settings chosen by environment (embedded defaults or production)."""

import dagster as dg

from fm_assets.defs.instance import ensure_pool_limits
from fm_assets.settings import Settings, load_settings
from fm_assets.storage.services import check_services


class FmPlatform(dg.ConfigurableResource):
    """Where the platform's state lives; `home` overrides FM_HOME (tests use a temp dir)."""

    home: str | None = None

    def settings(self) -> Settings:
        env = None
        if self.home:
            import os

            env = {**os.environ, "FM_HOME": self.home}
        return load_settings(env)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # Fail a run in seconds, naming the setting, when a production service is unreachable.
        check_services(self.settings())
        # On Kubernetes no `fm` command sets the per-pool limits; every run makes sure of them.
        if context.instance is not None:
            ensure_pool_limits(context.instance)

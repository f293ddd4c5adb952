"""The platform resource: settings chosen by environment (embedded defaults or production)."""

import dagster as dg

from fm_assets.settings import Settings, load_settings


class FmPlatform(dg.ConfigurableResource):
    """Where the platform's state lives; `home` overrides FM_HOME (tests use a temp dir)."""

    home: str | None = None

    def settings(self) -> Settings:
        env = None
        if self.home:
            import os

            env = {**os.environ, "FM_HOME": self.home}
        return load_settings(env)

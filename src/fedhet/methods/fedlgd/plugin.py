"""The `distilled` plug-in: a client trains on its cached local virtual data (FedLGD's
initialisation, `fedhet.distill`), never on its partition of the raw training set."""

from __future__ import annotations

from fedhet.engine.server import ClientData, ServerView
from fedhet.plugins import PLUGINS, Plugin


@PLUGINS.register("distilled")
class Distilled(Plugin):
    """Replaces each client's data by its virtual images (already normalised, so the engine
    neither augments nor normalises them again: FedLGD trains without augmentation)."""

    name = "distilled"

    def setup(self, server: ServerView) -> None:
        from fedhet.distill.core import load_or_make_distilled
        from fedhet.distill.spec import settings_for_run

        run = server.run
        if run["training"]["centralized"]:
            raise ValueError("distilled: the virtual data is per client; a centralized run "
                             "has none (drop the plug-in or training.centralized)")
        settings = settings_for_run(run, self.hp)
        data = load_or_make_distilled(settings, run["dataset"]["root"],
                                      run["partition"]["root"], server.device)
        if len(data.x) != server.num_clients:
            raise ValueError(f"distilled: the artefact {data.path} holds {len(data.x)} clients, "
                             f"the run has {server.num_clients}")
        self.x = [x.to(server.device) for x in data.x]
        self.y = [y.to(server.device) for y in data.y]
        self.artefact = data

    def client_data(self, client: int, round: int, data: ClientData) -> ClientData:
        return ClientData(x=self.x[client], y=self.y[client], normalized=True)

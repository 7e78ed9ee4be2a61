"""AskFlow: the application service behind POST /ask (``service``), the flow's state (``state``),
and its steps (``steps``, one module per group of states: ``plan``, ``cache``, ``execute``,
``analyze``, ``visualize``, ``record``, on the shared ``base``).

The package exports the service's command and answer types; the steps are imported from
``memtool.flows.ask.steps`` where they run (the FlowSteps Lambda), so the API's cold path never
loads them.
"""

from memtool.flows.ask.service import ASK_FLOW, AskAnswer, AskCommand, AskError, AskService

__all__ = ["ASK_FLOW", "AskAnswer", "AskCommand", "AskError", "AskService"]

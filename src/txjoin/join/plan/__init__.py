"""The planner, about to be split into modules (see analysis)."""

from txjoin.join.plan.analysis import NUMERIC_SCALE, Edge, OutputPlan, TableInfo, plan_output

__all__ = ["NUMERIC_SCALE", "Edge", "OutputPlan", "TableInfo", "plan_output"]

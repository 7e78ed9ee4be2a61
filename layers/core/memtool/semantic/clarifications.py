"""The parser's questions back to the user: what a question leaves open, asked in its own language.

A value the data does not hold, a name several dimensions hold, a metric the catalog lacks or a
term that may mean several, a word memtool does not know, no metric or several, a dimension the
metric does not have, a top-N of nothing: each is asked about (``Clarifier.clarification``), with
what each option means (``ChoiceTarget``) so a reply naming or numbering one can be applied. So
are the date a period is read on where rows have several, what a share word asks for, and which
of several periods a question means. The parser asks instead of guessing: a guess is a wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memtool.semantic.catalog import Catalog
from memtool.semantic.entities import EntityIndex
from memtool.semantic.followup import ChoiceTarget
from memtool.semantic.intent import Comparison
from memtool.semantic.parsed import ParsedQuestion
from memtool.semantic.phrases import STATISTIC_EN, STATISTIC_ZH
from memtool.semantic.time_expressions import TimeMatch


@dataclass(frozen=True)
class ClarificationNeed:
    """The parser's question back to the user (the planner wraps it in a plan.Clarification)."""

    question: str
    term: str | None
    options: list[str]
    reason: str  # unknown_metric | ambiguous_metric | unsupported_metric | unknown_term | outside_value | ...
    targets: list[ChoiceTarget] = field(default_factory=list)  # what each option means, in order


def several_windows(parsed: ParsedQuestion, found: list[TimeMatch]) -> ClarificationNeed:
    """Which one of the periods a question names, when they do not make one comparison."""
    labels = [t.window.label for t in found]
    if parsed.lang == "zh":
        return ClarificationNeed(f"问题里有多个时间（{'、'.join(labels)}），要看哪一个？", None, labels, "several_windows")
    return ClarificationNeed(f"The question names several periods ({', '.join(labels)}). Which one?", None, labels, "several_windows")


class Clarifier:
    """Decides what to ask about a recognised question, against one catalog and one entity index."""

    def __init__(self, catalog: Catalog, entities: EntityIndex) -> None:
        self.catalog = catalog
        self.entities = entities

    def clarification(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        """What to ask before ``parsed`` can be answered, with each option's meaning; None when nothing."""
        need = self._clarification_need(parsed)
        if need is None or need.targets:
            return need
        return ClarificationNeed(need.question, need.term, need.options, need.reason, self._targets(need, parsed))

    def _targets(self, need: ClarificationNeed, parsed: ParsedQuestion) -> list[ChoiceTarget]:
        """What each option means, so a reply that names or numbers one can be applied."""
        lang = parsed.lang
        by_metric_label = {m.label(lang): m.name for m in self.catalog.metrics}
        by_dimension_label = {d.label(lang): d.name for d in self.catalog.dimensions}
        targets: list[ChoiceTarget] = []
        for option in need.options:
            if option in by_metric_label:
                targets.append(ChoiceTarget(metric=by_metric_label[option]))
                continue
            if need.reason == "several_windows":
                targets.append(ChoiceTarget(window=option))
                continue
            if need.reason == "top_n_without_dimension" and option in by_dimension_label:
                targets.append(ChoiceTarget(dimension=by_dimension_label[option]))
                continue
            label = re.sub(r"\s*[(（][^)）]*[)）]\s*$", "", option).strip()
            values = self.entities.lookup(label)
            if need.reason == "ambiguous_value":
                dim_label = option[len(label):].strip(" ()（）")
                values = [v for v in values if self.catalog.dimension(v.dimension).label(lang) == dim_label] or values
            if values:
                targets.append(ChoiceTarget(dimension=values[0].dimension, value=values[0].value))
            else:
                targets.append(ChoiceTarget(window=option) if need.reason == "several_windows" else ChoiceTarget())
        return targets

    def _clarification_need(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        """The first thing to ask, in order: the words first (a value outside the data, a name several
        dimensions hold, an unsupported or ambiguous metric, an unknown word), then the metric (none,
        several), then what the metric cannot do (a dimension it lacks, a top-N of nothing)."""
        checks = (
            self._outside_value,
            self._ambiguous_value,
            self._unsupported_metric,
            self._ambiguous_metric,
            self._unknown_term,
            self._no_metric,
            self._several_metrics,
            self._incompatible_dimension,
            self._top_n_without_dimension,
        )
        for check in checks:
            need = check(parsed)
            if need is not None:
                return need
        return None

    def _metric_options(self, parsed: ParsedQuestion) -> list[str]:
        return [m.label(parsed.lang) for m in self.catalog.metrics]

    def _outside_value(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        if not parsed.outside:
            return None
        zh = parsed.lang == "zh"
        name, dimension = parsed.outside[0]
        options = self.entities.labels(dimension, parsed.lang)
        dim_label = self.catalog.dimension(dimension).label(parsed.lang)
        question = (
            f"数据中没有「{name}」这个{dim_label}。你想看哪个{dim_label}？"
            if zh
            else f"The data has no {dim_label} called '{name}'. Which {dim_label} do you mean?"
        )
        targets = [ChoiceTarget(dimension=dimension, value=e.value) for e in self.entities.of(dimension)]
        return ClarificationNeed(question, name, options, "outside_value", targets)

    def _ambiguous_value(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        if not parsed.entity_conflicts:
            return None
        zh = parsed.lang == "zh"
        term, values = parsed.entity_conflicts[0]
        options = [f"{v.label(parsed.lang)} ({self.catalog.dimension(v.dimension).label(parsed.lang)})" for v in values]
        question = f"「{term}」指的是哪一个？" if zh else f"Which '{term}' do you mean?"
        targets = [ChoiceTarget(dimension=v.dimension, value=v.value) for v in values]  # a looked-up value is not in the index
        return ClarificationNeed(question, term, options, "ambiguous_value", targets)

    def _unsupported_metric(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        if not parsed.unsupported:
            return None
        zh = parsed.lang == "zh"
        term = parsed.unsupported[0]
        question = (
            f"指标目录里没有「{term}」。你想看哪个指标？"
            if zh
            else f"'{term}' is not a metric in the catalog. Which metric do you mean?"
        )
        return ClarificationNeed(question, term, self._metric_options(parsed), "unsupported_metric")

    def _ambiguous_metric(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        if not parsed.ambiguous:
            return None
        zh = parsed.lang == "zh"
        term, candidates = parsed.ambiguous[0]
        options = [self.catalog.metric(c).label(parsed.lang) for c in candidates]
        question = f"「{term}」是指哪个指标？" if zh else f"Which metric do you mean by '{term}'?"
        return ClarificationNeed(question, term, options, "ambiguous_metric")

    def _unknown_term(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        if not parsed.unknown_terms:
            return None
        zh = parsed.lang == "zh"
        metric_options = self._metric_options(parsed)
        # With no metric, ask about the word most likely to be the metric: Chinese puts it last
        # ("魔都上个月的单子数"), English first; the other word is asked about next.
        term = parsed.unknown_terms[-1] if zh and not parsed.metrics else parsed.unknown_terms[0]
        if parsed.metrics and (term.lower() in STATISTIC_EN or term in STATISTIC_ZH):
            metric = self.catalog.metric(parsed.metrics[0])
            question = (
                f"指标目录里没有「{metric.zh}」的{term}。你想看哪个指标？"
                if zh
                else f"The catalog has no {term.lower()} of {metric.en}. Which metric do you mean?"
            )
            return ClarificationNeed(question, term, metric_options, "unknown_term")
        if parsed.metrics and term.lower() in ("total", "sum", "totals") and not self.catalog.metric(parsed.metrics[0]).additive:
            metric = self.catalog.metric(parsed.metrics[0])
            question = (
                f"「{metric.zh}」是平均值或每期的水平，加总没有意义。要看{metric.zh}本身吗？"
                if zh
                else f"{metric.en} is an average or a level each period reports: it has no total. Do you want {metric.en} itself?"
            )
            return ClarificationNeed(question, term, [metric.label(parsed.lang)], "total_of_a_level")
        if parsed.metrics:
            question, options = self._unknown_value_question(parsed, term)
        else:
            options = metric_options
            question = f"我不认识「{term}」。你想看哪个指标？" if zh else f"I don't know '{term}'. Which metric do you mean?"
        return ClarificationNeed(question, term, options, "unknown_term")

    def _unknown_value_question(self, parsed: ParsedQuestion, term: str) -> tuple[str, list[str]]:
        """An unknown word next to a metric: perhaps a value of one of the dimensions offered in a
        clarification (``clarify_dimensions``), which are the options."""
        zh = parsed.lang == "zh"
        offered = [self.catalog.dimension(name) for name in self.catalog.clarify_dimensions]
        options = [label for dim in offered for label in self.entities.labels(dim.name, parsed.lang)]
        names_zh = [d.zh for d in offered] or ["取值"]
        kinds_zh = "、".join(names_zh[:-1]) + ("或" if len(names_zh) > 1 else "") + names_zh[-1]
        plurals = [next((n for n in d.nouns_en if n.endswith("s")), d.en) for d in offered] or ["values"]
        kinds_en = f"{', '.join(plurals[:-1])} or {plurals[-1]}" if len(plurals) > 1 else plurals[0]
        question = (
            f"我不认识「{term}」。它是指某个{kinds_zh}吗？也可以去掉它再问。"
            if zh
            else f"I don't know '{term}'. Is it one of these {kinds_en}? You can also ask without it."
        )
        return question, options

    def _no_metric(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        if parsed.metrics:
            return None
        zh = parsed.lang == "zh"
        if parsed.ignored_words:
            # An English word memtool does not know, in a question without a metric: likely the metric.
            term = parsed.ignored_words[0]
            question = f"I don't know '{term}'. Which metric do you mean?" if not zh else f"我不认识「{term}」。你想看哪个指标？"
            return ClarificationNeed(question, term, self._metric_options(parsed), "unknown_term")
        question = "你想看哪个指标？" if zh else "Which metric do you want to see?"
        return ClarificationNeed(question, None, self._metric_options(parsed), "unknown_metric")

    def _several_metrics(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        shares = {m for m in parsed.metrics if self.catalog.metric(m).share_of in parsed.metrics}
        if shares:  # "收入中…的占比": the share of the revenue, not the revenue and a share
            parsed.metrics = [m for m in parsed.metrics if m in shares or not any(self.catalog.metric(s).share_of == m for s in shares)]
        if len(parsed.metrics) <= 1:
            return None
        options = [self.catalog.metric(m).label(parsed.lang) for m in parsed.metrics]
        question = "一次只能查一个指标，先看哪一个？" if parsed.lang == "zh" else "I can answer one metric at a time. Which one first?"
        return ClarificationNeed(question, None, options, "several_metrics")

    def _incompatible_dimension(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        metric = self.catalog.metric(parsed.metrics[0])  # the one metric from here on: a name the catalog lacks fails here
        if not parsed.incompatible:
            return None
        dim = self.catalog.dimension(parsed.incompatible[0])
        options = [m.label(parsed.lang) for m in self.catalog.metrics if dim.name in m.dimensions]
        question = (
            f"{metric.zh}没有「{dim.zh}」维度。要换成下面哪个指标？"
            if parsed.lang == "zh"
            else f"{metric.en} has no {dim.en} dimension. Which of these metrics do you want instead?"
        )
        return ClarificationNeed(question, dim.label(parsed.lang), options, "incompatible_dimension")

    def _top_n_without_dimension(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        """A top-N or a superlative ("最高", "the highest") with nothing to rank: the word changes the
        number (the largest of what?), so it is asked about, never dropped. Two values named of one
        dimension ("北京和上海哪个最高") are ranked against each other."""
        if parsed.top_n is None and not parsed.superlative:
            return None
        if parsed.group_dims or parsed.grain is not None or any(len(values) > 1 for values in parsed.filters.values()):
            return None
        metric = self.catalog.metric(parsed.metrics[0])
        attributes = [self.catalog.dimension(d) for d in metric.dimensions if self.catalog.dimension(d).kind == "attribute"]
        options = [dimension.label(parsed.lang) for dimension in attributes]
        if parsed.top_n is not None:
            question = f"前 {parsed.top_n} 名按什么排？" if parsed.lang == "zh" else f"Top {parsed.top_n} of what?"
            return ClarificationNeed(question, None, options, "top_n_without_dimension")
        label = metric.label(parsed.lang)
        question = (
            f"「{label}」最高或最低要在什么之间比？请选一个分组（或按月、按天）。"
            if parsed.lang == "zh"
            else f"The highest or lowest {label} among what? Pick a grouping (or by month, by day)."
        )
        return ClarificationNeed(question, None, options, "superlative_without_dimension")

    def date_asked(self, parsed: ParsedQuestion, metric: str, grain: str | None) -> tuple[str | None, ClarificationNeed | None]:
        """Which date a period reads when the metric's rows have several (``other_time_columns``):
        the one the question names (None for the default), or a question back when it names a
        period or a grain and no date. Reading the period on the wrong date is a wrong answer."""
        choices = self.catalog.time_column_choices(metric)
        if len(choices) < 2:
            return None, None
        named = [c for c in parsed.date_columns if c in choices]
        if len(named) == 1:
            return (None if named[0] == choices[0] else named[0]), None
        if not named and not (parsed.times or parsed.carried_window is not None or grain is not None):
            return None, None  # the default window: as the model's header says, by its time column
        options = [c.rpartition(".")[2] for c in choices]
        label = self.catalog.metric(metric).label(parsed.lang)
        question = (
            f"「{label}」的每一行有几个日期（{'、'.join(options)}）。时间范围按哪个日期算？"
            if parsed.lang == "zh"
            else f"Each row of {label} has several dates ({', '.join(options)}). Which date should the period be read on?"
        )
        targets = [ChoiceTarget(time_column=c) for c in choices]
        return None, ClarificationNeed(question, None, options, "which_date", targets)

    def share_asked(
        self, parsed: ParsedQuestion, metric: str, dimensions: tuple[str, ...], comparison: Comparison | None
    ) -> tuple[str | None, ClarificationNeed | None]:
        """What a share word (占比, share, percentage of) asks for, or why it must be asked about.

        Grouped, each group's share of the total; filtered by one dimension, that filter's part of
        the whole without it. A share of an average or a ratio, of a comparison, or of nothing named
        is asked about: the plain metric is never answered in its place."""
        spec = self.catalog.metric(metric)
        zh = parsed.lang == "zh"
        label = spec.label(parsed.lang)
        if spec.kind == "ratio" or not spec.additive:
            question = (
                f"「{label}」是比率或平均值，不能算占比。要看各组的{label}，还是换一个可以加总的指标？"
                if zh
                else f"{label} is a rate or an average, so it has no share of a total. Do you want {label} by group, or another metric?"
            )
            return None, ClarificationNeed(question, "占比" if zh else "share", [], "share_of_ratio")
        if comparison is not None:
            question = "占比和同比/环比要分开问：先看哪一个？" if zh else "Ask for the share and the change separately: which one first?"
            return None, ClarificationNeed(question, "占比" if zh else "share", [], "share_with_comparison")
        if any(self.catalog.dimension(d).kind != "time" for d in dimensions):
            return "groups", None
        named = [d for d in parsed.filters if d not in dimensions]
        if len(named) == 1:
            return named[0], None
        if not named:
            question = (
                "占哪部分的比例？请说出要看的部分（如某个渠道）或按什么分组。"
                if zh
                else "A share of what? Name the part (a channel, a city) or a grouping."
            )
            return None, ClarificationNeed(question, "占比" if zh else "share", [], "share_of_what")
        labels = [self.catalog.dimension(d).label(parsed.lang) for d in named]
        question = (
            f"占比是哪一部分占哪个整体？{'、'.join(labels)}都被限定了，请只保留作为整体的条件再问。"
            if zh
            else f"A share of which whole? The question narrows {', '.join(labels)}: keep only the whole's conditions and ask again."
        )
        return None, ClarificationNeed(question, "占比" if zh else "share", [], "share_of_which")

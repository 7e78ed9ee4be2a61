// ECharts, canvas renderer, drawing the option the API proposes (answer.chart.option), or the same
// data as another candidate type the user picked. Chinese labels get a CJK font.

import * as echarts from "echarts/core";
import { BarChart, LineChart, PieChart, ScatterChart } from "echarts/charts";
import { DatasetComponent, GridComponent, LegendComponent, TitleComponent, TooltipComponent } from "echarts/components";
import { CanvasRenderer } from "echarts/renderers";

echarts.use([BarChart, LineChart, PieChart, ScatterChart, DatasetComponent, GridComponent, LegendComponent, TitleComponent, TooltipComponent, CanvasRenderer]);

const FONT = '"Noto Sans CJK SC", "Noto Sans SC", "WenQuanYi Micro Hei", "PingFang SC", "Microsoft YaHei", sans-serif';

type Option = Record<string, unknown>;
type Axis = { type?: string; data?: unknown[]; name?: string; [key: string]: unknown };
type Series = { name?: string; type?: string; data?: unknown[]; [key: string]: unknown };

/** Draw ``option`` as ``type``; ``asProposed``: the option as the API gave it (its own chart). */
export function renderChart(holder: HTMLElement, option: Option, type: string, asProposed = false): void {
  const existing = echarts.getInstanceByDom(holder);
  const chart = existing ?? echarts.init(holder, undefined, { renderer: "canvas" });
  const drawn = asProposed ? option : as(option, type);
  chart.setOption({ ...drawn, textStyle: { fontFamily: FONT }, animation: false }, { notMerge: true });
  chart.resize(); // the holder may have been hidden (a table picked) when the chart was first drawn
  if (!existing) window.addEventListener("resize", () => chart.resize());
}

/** The option drawn as ``type``: the API's own when it is that type, else the same series re-shaped. */
export function as(option: Option, type: string): Option {
  const x = first(option.xAxis);
  const y = first(option.yAxis);
  const series = (Array.isArray(option.series) ? option.series : [option.series]).filter(Boolean) as Series[];
  const categoryAxis = x?.type === "category" ? x : y?.type === "category" ? y : undefined;
  const categories = (categoryAxis?.data ?? []) as unknown[];
  const horizontal = y?.type === "category";
  const base = { title: option.title, tooltip: { trigger: type === "pie" ? "item" : "axis" }, legend: option.legend };
  if (!categoryAxis || !series.length) return option; // not a category chart: drawn as proposed
  if (type === "pie") {
    const [one] = series;
    return {
      ...base,
      series: [{ type: "pie", name: one.name, radius: "60%", data: categories.map((name, i) => ({ name: String(name), value: (one.data ?? [])[i] })) }],
    };
  }
  const seriesType = type === "line" ? "line" : type === "scatter" ? "scatter" : "bar";
  const wantHorizontal = type === "horizontal_bar";
  const valueAxis: Axis = { type: "value", name: (horizontal ? x : y)?.name };
  const category: Axis = { type: "category", data: categories, inverse: wantHorizontal };
  return {
    ...base,
    grid: { containLabel: true },
    xAxis: wantHorizontal ? valueAxis : category,
    yAxis: wantHorizontal ? category : valueAxis,
    series: series.map((s) => ({ name: s.name, type: seriesType, data: s.data })),
  };
}

function first(axis: unknown): Axis | undefined {
  if (Array.isArray(axis)) return axis[0] as Axis | undefined;
  return (axis ?? undefined) as Axis | undefined;
}

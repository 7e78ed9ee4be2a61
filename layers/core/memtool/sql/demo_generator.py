"""The demo warehouse's data and its draws: the regions, channels, products and holidays it knows,
the weights and growth rates that shape its rows, the two planted anomalies, and the generators
of its order lines, refunds and prescriptions.

Every draw comes from the one numpy ``Generator`` that ``memtool.sql.demo_warehouse`` passes in,
in a fixed order, so the same (seed, scale, anchor) always gives the same rows. That module
writes them to DuckDB, with the schema, the summary and the drifted variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy loads lazily: the Lambda cold path never builds a warehouse
    import numpy as np

REGIONS = {
    "华东": [("上海", "Shanghai"), ("杭州", "Hangzhou"), ("南京", "Nanjing")],
    "华北": [("北京", "Beijing"), ("天津", "Tianjin")],
    "华南": [("广州", "Guangzhou"), ("深圳", "Shenzhen")],
    "西南": [("成都", "Chengdu"), ("重庆", "Chongqing")],
    "华中": [("武汉", "Wuhan")],
}
CHANNELS = [("医院", "hospital"), ("零售药店", "retail_pharmacy"), ("电商", "ecommerce"), ("诊所", "clinic")]
THERAPEUTIC_AREAS = ["心血管", "肿瘤", "呼吸", "糖尿病"]
REFUND_REASONS = ["质量问题", "物流延误", "重复下单", "其他"]

MONTHS_COVERED = 24
LINES_PER_UNIT_SCALE = 300_000

# 春节 (Chinese New Year's Day). Years outside the table get no holiday dip.
CNY_DATES = {
    2023: date(2023, 1, 22),
    2024: date(2024, 2, 10),
    2025: date(2025, 1, 29),
    2026: date(2026, 2, 17),
    2027: date(2027, 2, 6),
    2028: date(2028, 1, 26),
    2029: date(2029, 2, 13),
}


@dataclass(frozen=True)
class _ProductSpec:
    name: str
    name_en: str
    brand: str
    area: str
    launch_offset_months: int  # relative to the window's first month; >= 0 launches inside the window
    price_cents: int  # list price per box
    share: float  # relative share of order lines once mature
    yearly_growth: float
    hospital_qty: float  # mean boxes per hospital order line
    channel_affinity: tuple[float, float, float, float]  # 医院, 零售药店, 电商, 诊所 (CHANNELS order)


# Brands are invented; molecules are real so the catalogue reads like a pharma company's.
# Second line of each: launch (months from the window start), price (cents), line share,
# yearly growth, boxes per hospital line, channel affinity.
_PRODUCTS: tuple[_ProductSpec, ...] = (
    _ProductSpec(
        "阿托伐他汀钙片", "Atorvastatin Calcium Tablets", "脉立安", "心血管",
        -150, 3550, 1.6, 0.02, 60, (1.0, 1.0, 0.9, 1.0),
    ),
    _ProductSpec(
        "苯磺酸氨氯地平片", "Amlodipine Besylate Tablets", "安平达", "心血管",
        -170, 2800, 1.5, -0.03, 60, (1.0, 1.1, 0.8, 1.2),
    ),
    _ProductSpec(
        "沙库巴曲缬沙坦钠片", "Sacubitril Valsartan Sodium Tablets", "心诺康", "心血管",
        -66, 19800, 1.0, 0.18, 30, (1.0, 0.7, 0.5, 0.4),
    ),
    _ProductSpec(
        "维立西呱片", "Vericiguat Tablets", "维心达", "心血管",
        5, 23600, 0.8, 0.30, 20, (1.0, 0.4, 0.3, 0.2),
    ),
    _ProductSpec(
        "甲磺酸奥希替尼片", "Osimertinib Mesylate Tablets", "安瑞替", "肿瘤",
        -78, 248000, 0.6, 0.10, 4, (1.0, 0.5, 0.15, 0.0),
    ),
    _ProductSpec(
        "帕博利珠单抗注射液", "Pembrolizumab Injection", "瑞免康", "肿瘤",
        -60, 179000, 0.4, 0.15, 3, (1.0, 0.12, 0.0, 0.0),
    ),
    _ProductSpec(
        "注射用曲妥珠单抗", "Trastuzumab for Injection", "赫瑞宁", "肿瘤",
        -102, 145000, 0.5, 0.00, 4, (1.0, 0.15, 0.0, 0.0),
    ),
    _ProductSpec(
        "甲磺酸仑伐替尼胶囊", "Lenvatinib Mesylate Capsules", "乐维宁", "肿瘤",
        10, 198000, 0.5, 0.25, 4, (1.0, 0.5, 0.1, 0.0),
    ),
    _ProductSpec(
        "布地奈德福莫特罗吸入粉雾剂", "Budesonide and Formoterol Inhalation Powder", "舒畅吸", "呼吸",
        -126, 28500, 1.1, 0.05, 20, (1.0, 1.0, 0.9, 0.6),
    ),
    _ProductSpec(
        "孟鲁司特钠片", "Montelukast Sodium Tablets", "顺息宁", "呼吸",
        -138, 6200, 1.2, 0.03, 30, (0.8, 1.1, 1.1, 1.0),
    ),
    _ProductSpec(
        "噻托溴铵吸入粉雾剂", "Tiotropium Bromide Inhalation Powder", "思瑞达", "呼吸",
        -90, 21200, 0.8, 0.08, 20, (1.0, 0.8, 0.6, 0.5),
    ),
    _ProductSpec(
        "盐酸氨溴索口服溶液", "Ambroxol Hydrochloride Oral Solution", "沐清", "呼吸",
        -162, 3800, 1.3, 0.00, 40, (0.8, 1.2, 1.2, 1.3),
    ),
    _ProductSpec(
        "盐酸二甲双胍缓释片", "Metformin Hydrochloride Extended-release Tablets", "格平", "糖尿病",
        -186, 2450, 1.5, 0.00, 60, (1.0, 1.1, 0.9, 1.2),
    ),
    _ProductSpec(
        "达格列净片", "Dapagliflozin Tablets", "达糖安", "糖尿病",
        -66, 13200, 1.1, 0.20, 30, (1.0, 0.9, 0.8, 0.6),
    ),
    _ProductSpec(
        "司美格鲁肽注射液", "Semaglutide Injection", "司糖宁", "糖尿病",
        3, 47800, 1.0, 0.40, 6, (1.0, 0.6, 0.8, 0.2),
    ),
    _ProductSpec(
        "磷酸西格列汀片", "Sitagliptin Phosphate Tablets", "捷糖维", "糖尿病",
        -114, 8900, 0.9, -0.12, 30, (1.0, 0.9, 0.7, 0.8),
    ),
)

# City weights (order volume) and yearly growth, in REGIONS order.
_CITY_WEIGHT = {
    "上海": 0.16, "杭州": 0.09, "南京": 0.07, "北京": 0.15, "天津": 0.06,
    "广州": 0.11, "深圳": 0.10, "成都": 0.09, "重庆": 0.08, "武汉": 0.09,
}
_CITY_GROWTH = {
    "上海": 0.05, "杭州": 0.09, "南京": 0.04, "北京": 0.03, "天津": -0.04,
    "广州": 0.06, "深圳": 0.10, "成都": 0.14, "重庆": 0.08, "武汉": 0.06,
}
# Per channel (CHANNELS order): share of orders, yearly growth, weekend factor, qty factor,
# typical discount rate.
_CHANNEL_SHARE = (0.42, 0.28, 0.16, 0.14)
_CHANNEL_GROWTH = (0.02, 0.04, 0.35, 0.03)
_CHANNEL_WEEKEND = (0.55, 1.05, 1.15, 0.70)
_CHANNEL_QTY = (1.0, 0.30, 0.20, 0.35)
_CHANNEL_DISCOUNT = (0.01, 0.05, 0.08, 0.03)
_ECOMMERCE = 2  # index of 电商 in CHANNELS

_LINES_PER_ORDER = (1, 2, 3, 4)
_LINES_PER_ORDER_P = (0.55, 0.28, 0.12, 0.05)

_TEST_ORDER_SHARE = 0.01
_UNPAID_ORDER_SHARE = 0.03
_REFUND_RATE = 0.025
_REFUND_REASON_P = {  # 质量问题, 物流延误, 重复下单, 其他 (REFUND_REASONS order)
    "ecommerce": (0.10, 0.50, 0.20, 0.20),
    "other": (0.20, 0.25, 0.30, 0.25),
}
_RX_PER_LINE = 0.4

# Planted anomalies.
_SPIKE_REFUND_RATE = 0.6
_DROP_FACTOR = 0.25
_QUALITY = REFUND_REASONS.index("质量问题")


@dataclass(frozen=True)
class PlantedAnomaly:
    """A deliberate irregularity an analysis of the demo data should find."""

    kind: str  # "refund_spike" | "regional_drop"
    month: str  # YYYY-MM
    description: str
    factor: float  # the multiplier planted (refund rate, or the city's order volume)
    product_id: int | None = None
    product_name: str | None = None
    region_id: int | None = None
    city: str | None = None
    reason: str | None = None


# --- calendar ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calendar:
    start: date
    anchor: date
    days: list[date]
    month_labels: list[str]

    @classmethod
    def ending(cls, anchor: date) -> Calendar:
        total = anchor.year * 12 + anchor.month - 1 - (MONTHS_COVERED - 1)
        start = date(total // 12, total % 12 + 1, 1)
        days = [start + timedelta(days=i) for i in range((anchor - start).days + 1)]
        labels = [f"{(total + i) // 12:04d}-{(total + i) % 12 + 1:02d}" for i in range(MONTHS_COVERED)]
        return cls(start, anchor, days, labels)

    @property
    def n_days(self) -> int:
        return len(self.days)

    def month_index(self, day: date) -> int:
        return (day.year - self.start.year) * 12 + day.month - self.start.month

    def month_bounds(self, month_index: int) -> tuple[int, int]:
        """Day indexes [first, last] of a month within the window."""
        total = self.start.year * 12 + self.start.month - 1 + month_index
        first = date(total // 12, total % 12 + 1, 1)
        nxt = date((total + 1) // 12, (total + 1) % 12 + 1, 1)
        return (first - self.start).days, min((nxt - self.start).days, self.n_days) - 1


def _add_months(day: date, months: int, *, on_day: int) -> date:
    total = day.year * 12 + day.month - 1 + months
    return date(total // 12, total % 12 + 1, on_day)


def product_rows(window_start: date) -> list[dict[str, Any]]:
    rows = []
    for product_id, spec in enumerate(_PRODUCTS, start=1):
        launch = _add_months(window_start, spec.launch_offset_months, on_day=1 + (product_id * 7) % 26)
        rows.append({"product_id": product_id, "spec": spec, "launch_date": launch})
    return rows


def city_rows() -> list[tuple[int, str, str, str]]:
    cities: list[tuple[int, str, str, str]] = []
    for region_name, members in REGIONS.items():
        for city, city_en in members:
            cities.append((len(cities) + 1, region_name, city, city_en))
    return cities


# --- anomalies --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AnomalyPlan:
    kind: str
    month_index: int
    month: str
    factor: float
    product_index: int | None = None
    city_index: int | None = None

    def describe(self, products: list[dict[str, Any]]) -> PlantedAnomaly:
        if self.kind == "refund_spike":
            assert self.product_index is not None
            product = products[self.product_index]
            spec: _ProductSpec = product["spec"]
            return PlantedAnomaly(
                kind=self.kind,
                month=self.month,
                factor=self.factor,
                product_id=product["product_id"],
                product_name=spec.name,
                reason="质量问题",
                description=(
                    f"{self.month} {spec.name}（{spec.brand}）批次质量问题：当月前三周付款的订单行约"
                    f"{int(self.factor * 100)}%在一周内以“质量问题”退款，退款集中在当月。"
                ),
            )
        assert self.city_index is not None
        region_id, region_name, city, _ = city_rows()[self.city_index]
        return PlantedAnomaly(
            kind=self.kind,
            month=self.month,
            factor=self.factor,
            region_id=region_id,
            city=city,
            description=(
                f"{self.month} {city}（{region_name}）经销商切换：全渠道订单量降至约"
                f"{int(self.factor * 100)}%，当月销售额骤降，次月恢复；处方量未受影响。"
            ),
        )


def plan_anomalies(
    rng: np.random.Generator, calendar: Calendar, products: list[dict[str, Any]]
) -> list[_AnomalyPlan]:
    """Pick the anomaly months in the second year, away from holiday-shaped months."""
    second_year = range(12, MONTHS_COVERED - 2)  # both neighbours of the month stay in the window

    def calendar_month(i: int) -> int:
        return int(calendar.month_labels[i][5:])

    # The drop's month and both neighbours avoid 春节 (Jan/Feb) and 双十一 (Nov).
    def quiet(i: int) -> bool:
        return {calendar_month(i - 1), calendar_month(i), calendar_month(i + 1)}.isdisjoint({1, 2, 11})

    drop_months = [i for i in second_year if quiet(i)]
    spike_months = [i for i in second_year if calendar_month(i) not in (1, 2, 11)]
    drop_month = int(drop_months[rng.integers(len(drop_months))])
    spike_choices = [i for i in spike_months if i != drop_month]
    spike_month = int(spike_choices[rng.integers(len(spike_choices))])

    mature = [i for i, p in enumerate(products) if p["spec"].launch_offset_months < 0 and p["spec"].share >= 1.0]
    spike_product = int(mature[rng.integers(len(mature))])
    cities = city_rows()
    big_cities = [i for i, c in enumerate(cities) if _CITY_WEIGHT[c[2]] >= 0.08]
    drop_city = int(big_cities[rng.integers(len(big_cities))])
    return [
        _AnomalyPlan(
            "refund_spike",
            spike_month,
            calendar.month_labels[spike_month],
            _SPIKE_REFUND_RATE,
            product_index=spike_product,
        ),
        _AnomalyPlan(
            "regional_drop", drop_month, calendar.month_labels[drop_month], _DROP_FACTOR, city_index=drop_city
        ),
    ]


def _anomaly(plans: list[_AnomalyPlan], kind: str) -> _AnomalyPlan:
    return next(p for p in plans if p.kind == kind)


# --- shapes -----------------------------------------------------------------------------------


def _day_features(calendar: Calendar) -> dict[str, np.ndarray]:
    import numpy as np

    days = calendar.days
    years = np.array([(d - calendar.start).days / 365.25 for d in days])
    weekend = np.array([d.weekday() >= 5 for d in days])
    cny = np.ones(len(days))
    for holiday in CNY_DATES.values():
        for i, d in enumerate(days):
            offset = (d - holiday).days
            if -7 <= offset <= 10:  # the week before through the lantern-festival tail
                cny[i] = 0.4 if -2 <= offset <= 6 else 0.6
            elif -21 <= offset <= -8:
                cny[i] = 1.08  # pre-holiday stocking
    ecommerce_event = np.ones(len(days))
    ecommerce_discount = np.ones(len(days))
    for i, d in enumerate(days):
        if d.month == 11 and d.day <= 10:
            ecommerce_event[i], ecommerce_discount[i] = 2.5, 2.0
        elif d.month == 11 and d.day == 11:
            ecommerce_event[i], ecommerce_discount[i] = 10.0, 3.0
        elif d.month == 11 and d.day <= 15:
            ecommerce_event[i], ecommerce_discount[i] = 1.5, 1.8
        elif d.month == 6 and d.day == 18:
            ecommerce_event[i], ecommerce_discount[i] = 4.0, 2.0
        elif d.month == 6 and d.day < 18:
            ecommerce_event[i], ecommerce_discount[i] = 1.3, 1.5
    day_of_year = np.array([d.timetuple().tm_yday for d in days])
    winter = 1.0 + 0.35 * np.cos(2 * np.pi * (day_of_year - 15) / 365.25)  # respiratory season
    return {
        "years": years,
        "weekend": weekend,
        "cny": cny,
        "ecommerce_event": ecommerce_event,
        "ecommerce_discount": ecommerce_discount,
        "winter": winter,
    }


def _product_weights(
    calendar: Calendar, products: list[dict[str, Any]], features: dict[str, np.ndarray]
) -> np.ndarray:
    """Line share by (day, channel, product): launches ramp up, mature products grow or decline."""
    import numpy as np

    n_days = calendar.n_days
    weights = np.zeros((n_days, len(CHANNELS), len(products)))
    day_numbers = np.arange(n_days)
    for p, product in enumerate(products):
        spec: _ProductSpec = product["spec"]
        since_launch = day_numbers - (product["launch_date"] - calendar.start).days
        ramp = np.where(since_launch < 0, 0.0, 1.0 / (1.0 + np.exp(-(since_launch - 120) / 45.0)))
        curve = spec.share * ramp * (1.0 + spec.yearly_growth) ** features["years"]
        if spec.area == "呼吸":
            curve = curve * features["winter"]
        weights[:, :, p] = curve[:, None] * np.asarray(spec.channel_affinity)[None, :]
    return weights


# --- facts ------------------------------------------------------------------------------------


def generate_orders(
    rng: np.random.Generator,
    calendar: Calendar,
    products: list[dict[str, Any]],
    plans: list[_AnomalyPlan],
    scale: float,
) -> dict[str, np.ndarray]:
    import numpy as np

    features = _day_features(calendar)
    cities = city_rows()
    n_days, n_cities, n_channels = calendar.n_days, len(cities), len(CHANNELS)

    # Order volume per (day, city, channel) cell.
    day_w = 1.06 ** features["years"] * features["cny"]
    city_w = np.array([[_CITY_WEIGHT[c[2]] * (1 + _CITY_GROWTH[c[2]]) ** y for c in cities] for y in features["years"]])
    channel_growth = (1 + np.asarray(_CHANNEL_GROWTH))[None, :] ** features["years"][:, None]
    channel_w = np.asarray(_CHANNEL_SHARE)[None, :] * channel_growth
    channel_w = channel_w * np.where(features["weekend"][:, None], np.asarray(_CHANNEL_WEEKEND)[None, :], 1.0)
    channel_w[:, _ECOMMERCE] *= features["ecommerce_event"]
    drop = _anomaly(plans, "regional_drop")
    first, last = calendar.month_bounds(drop.month_index)
    city_w[first : last + 1, drop.city_index] *= drop.factor
    cells = day_w[:, None, None] * city_w[:, :, None] * channel_w[:, None, :]

    mean_lines = float(np.dot(_LINES_PER_ORDER, _LINES_PER_ORDER_P))
    n_orders_target = max(1, round(LINES_PER_UNIT_SCALE * scale / mean_lines))
    counts = rng.multinomial(n_orders_target, (cells / cells.sum()).ravel())
    cell_of_order = np.repeat(np.arange(counts.size), counts)
    order_day = cell_of_order // (n_cities * n_channels)
    order_city = (cell_of_order // n_channels) % n_cities
    order_channel = cell_of_order % n_channels
    # Shuffle within a day so order ids are not grouped by city and channel.
    perm = np.lexsort((rng.random(order_day.size), order_day))
    order_day, order_city, order_channel = order_day[perm], order_city[perm], order_channel[perm]
    n_orders = order_day.size
    day_start = np.searchsorted(order_day, order_day, side="left")
    seq_in_day = np.arange(n_orders) - day_start + 1
    yyyymmdd = np.array([d.year * 10000 + d.month * 100 + d.day for d in calendar.days], dtype=np.int64)
    order_id = yyyymmdd[order_day] * 1_000_000 + seq_in_day

    is_test_order = rng.random(n_orders) < _TEST_ORDER_SHARE
    unpaid_order = rng.random(n_orders) < _UNPAID_ORDER_SHARE
    pay_delay_days = rng.choice(3, size=n_orders, p=(0.72, 0.20, 0.08))
    pay_second = np.where(
        order_channel == _ECOMMERCE,
        rng.integers(0, 86_400, n_orders),
        rng.integers(8 * 3600, 22 * 3600, n_orders),
    )
    # Seconds since the window start; -1 = not paid (yet).
    paid_at = (order_day + pay_delay_days).astype(np.int64) * 86_400 + pay_second
    window_end = calendar.n_days * 86_400  # the end of the anchor day
    paid_at = np.where(unpaid_order | (paid_at >= window_end), -1, paid_at)

    # Lines.
    n_lines = rng.choice(_LINES_PER_ORDER, size=n_orders, p=_LINES_PER_ORDER_P)
    line_order = np.repeat(np.arange(n_orders), n_lines)
    first_line = np.cumsum(n_lines) - n_lines
    line_id = np.arange(line_order.size) - first_line[line_order] + 1
    line_day = order_day[line_order]
    line_channel = order_channel[line_order]

    weights = _product_weights(calendar, products, features)
    cumulative = np.cumsum(weights, axis=2)
    cumulative /= cumulative[:, :, -1:]
    rows = cumulative.reshape(n_days * n_channels, -1)[line_day * n_channels + line_channel]
    product = np.minimum((rows < rng.random(line_order.size)[:, None]).sum(axis=1), len(products) - 1)
    del rows

    specs = [p["spec"] for p in products]
    hospital_qty = np.array([s.hospital_qty for s in specs])[product]
    mean_qty = np.maximum(hospital_qty * np.asarray(_CHANNEL_QTY)[line_channel], 1.0)
    qty = 1 + rng.poisson(mean_qty - 1.0)
    price = np.array([s.price_cents for s in specs], dtype=np.int64)[product]
    gross = qty.astype(np.int64) * price
    rate = np.asarray(_CHANNEL_DISCOUNT)[line_channel] * rng.uniform(0.5, 1.5, line_order.size)
    rate = np.where(line_channel == _ECOMMERCE, rate * features["ecommerce_discount"][line_day], rate)
    discount = np.rint(gross * np.minimum(rate, 0.4)).astype(np.int64)

    return {
        "order_id": order_id[line_order],
        "line_id": line_id.astype(np.int32),
        "order_day": line_day.astype(np.int32),
        "paid_at": paid_at[line_order],
        "product_id": (product + 1).astype(np.int32),
        "region_id": (order_city[line_order] + 1).astype(np.int32),
        "channel_id": (line_channel + 1).astype(np.int32),
        "qty": qty.astype(np.int32),
        "gross_cents": gross,
        "discount_cents": discount,
        "is_test": is_test_order[line_order],
    }


def generate_refunds(
    rng: np.random.Generator, calendar: Calendar, orders: dict[str, np.ndarray], plans: list[_AnomalyPlan]
) -> dict[str, np.ndarray]:
    import numpy as np

    n = orders["order_id"].size
    paid = orders["paid_at"] >= 0
    eligible = paid & ~orders["is_test"]
    net = orders["gross_cents"] - orders["discount_cents"]
    ecommerce = orders["channel_id"] == _ECOMMERCE + 1

    refunded = eligible & (rng.random(n) < _REFUND_RATE)
    reason = np.where(
        ecommerce,
        rng.choice(len(REFUND_REASONS), size=n, p=_REFUND_REASON_P["ecommerce"]),
        rng.choice(len(REFUND_REASONS), size=n, p=_REFUND_REASON_P["other"]),
    )
    # Most refunds come within a week or two; a tail crosses into the next month.
    delay = (np.minimum(rng.exponential(6.0, n), 45.0) * 86_400).astype(np.int64) + 7_200
    full = rng.random(n) < 0.65
    partial = np.floor(net * rng.uniform(0.1, 0.9, n)).astype(np.int64)
    amount = np.where(full, net, np.maximum(partial, 1))

    # The refund spike: a bad batch of one product, paid in the month's first three weeks.
    spike = _anomaly(plans, "refund_spike")
    assert spike.product_index is not None  # a refund spike is planted on one product
    first, last = calendar.month_bounds(spike.month_index)
    paid_day = orders["paid_at"] // 86_400
    batch = eligible & (orders["product_id"] == spike.product_index + 1) & (paid_day >= first) & (paid_day <= last - 8)
    recalled = batch & (rng.random(n) < spike.factor)
    recall_delay = rng.integers(86_400, 7 * 86_400, n)
    refunded = refunded | recalled
    reason = np.where(recalled, _QUALITY, reason)
    delay = np.where(recalled, recall_delay, delay)
    amount = np.where(recalled, net, amount)

    refunded_at = orders["paid_at"] + delay
    refunded &= refunded_at < calendar.n_days * 86_400  # refunds after the anchor have not happened yet
    index = np.flatnonzero(refunded)
    index = index[np.lexsort((orders["line_id"][index], orders["order_id"][index], refunded_at[index]))]
    return {
        "refund_id": np.arange(1, index.size + 1, dtype=np.int64) + 900_000_000,
        "order_id": orders["order_id"][index],
        "line_id": orders["line_id"][index],
        "refunded_at": refunded_at[index],
        "refund_cents": amount[index],
        "reason_code": reason[index].astype(np.int32),
    }


def generate_prescriptions(
    rng: np.random.Generator, calendar: Calendar, products: list[dict[str, Any]], scale: float
) -> dict[str, np.ndarray]:
    """Hospital prescriptions: demand that follows the hospital channel, untouched by the sales anomalies."""
    import numpy as np

    features = _day_features(calendar)
    cities = city_rows()
    day_w = 1.06 ** features["years"] * features["cny"] * np.where(features["weekend"], 0.35, 1.0)
    city_w = np.array([_CITY_WEIGHT[c[2]] for c in cities])
    cells = day_w[:, None] * city_w[None, :]
    n_rx = max(1, round(LINES_PER_UNIT_SCALE * scale * _RX_PER_LINE))
    counts = rng.multinomial(n_rx, (cells / cells.sum()).ravel())
    cell = np.repeat(np.arange(counts.size), counts)
    rx_day, rx_city = cell // len(cities), cell % len(cities)

    weights = _product_weights(calendar, products, features)[:, 0, :]  # the hospital channel's mix
    cumulative = np.cumsum(weights, axis=1)
    cumulative /= cumulative[:, -1:]
    product = np.minimum((cumulative[rx_day] < rng.random(rx_day.size)[:, None]).sum(axis=1), len(products) - 1)

    # Hospitals per city scale with the city; a few big hospitals write most prescriptions (Zipf).
    hospitals = np.maximum(np.rint(city_w / city_w.max() * 30).astype(int), 8)
    zipf = np.zeros((len(cities), hospitals.max()))
    for c, h in enumerate(hospitals):
        zipf[c, :h] = 1.0 / np.arange(1, h + 1)
    zipf = np.cumsum(zipf, axis=1)
    zipf /= zipf[:, -1:]
    hospital = np.minimum((zipf[rx_city] < rng.random(rx_day.size)[:, None]).sum(axis=1), hospitals[rx_city] - 1)
    qty = 1 + rng.poisson(0.8, rx_day.size)
    return {
        "rx_id": np.arange(1, rx_day.size + 1, dtype=np.int64) + 500_000_000,
        "rx_day": rx_day.astype(np.int32),
        "product_id": (product + 1).astype(np.int32),
        "region_id": (rx_city + 1).astype(np.int32),
        "hospital_id": ((rx_city + 1) * 1000 + hospital + 1).astype(np.int32),
        "qty": qty.astype(np.int32),
    }

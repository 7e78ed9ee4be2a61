"""The demo warehouse schema: a contract that tests, evaluations and the semantic layer share."""

from __future__ import annotations

# table -> column -> type (DuckDB / Redshift spelling)
WAREHOUSE_SCHEMA: dict[str, dict[str, str]] = {
    "dim_region": {"region_id": "INT", "region_name": "VARCHAR", "city": "VARCHAR", "city_en": "VARCHAR"},
    "dim_channel": {"channel_id": "INT", "channel_name": "VARCHAR", "channel_en": "VARCHAR"},
    "dim_product": {
        "product_id": "INT",
        "product_name": "VARCHAR",
        "product_en": "VARCHAR",
        "brand": "VARCHAR",
        "therapeutic_area": "VARCHAR",
        "launch_date": "DATE",
    },
    "fact_order_line": {
        "order_id": "BIGINT",
        "line_id": "INT",
        "order_date": "DATE",
        "paid_at": "TIMESTAMP",
        "product_id": "INT",
        "region_id": "INT",
        "channel_id": "INT",
        "qty": "INT",
        "gross_amount": "DECIMAL(12,2)",
        "discount_amount": "DECIMAL(12,2)",
        "is_test": "BOOLEAN",
    },
    "fact_refund": {
        "refund_id": "BIGINT",
        "order_id": "BIGINT",
        "line_id": "INT",
        "refunded_at": "TIMESTAMP",
        "refund_amount": "DECIMAL(12,2)",
        "reason": "VARCHAR",
    },
    "fact_prescription": {
        "rx_id": "BIGINT",
        "rx_date": "DATE",
        "product_id": "INT",
        "region_id": "INT",
        "hospital_id": "INT",
        "qty": "INT",
    },
}

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

"""Parsing of ISO-8601-style dates, times, datetimes and durations."""

from datetime_parse.calendar import day_of_year, days_in_month, is_leap_year, weekday
from datetime_parse.durations import Duration, format_duration, parse_duration
from datetime_parse.errors import ParseError
from datetime_parse.parser import Date, DateTime, Time, parse_date, parse_datetime, parse_time

__all__ = [
    "Date",
    "DateTime",
    "Duration",
    "ParseError",
    "Time",
    "day_of_year",
    "days_in_month",
    "format_duration",
    "is_leap_year",
    "parse_date",
    "parse_datetime",
    "parse_duration",
    "parse_time",
    "weekday",
]

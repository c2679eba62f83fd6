-- ONE scan of the source for several preprocessing tasks (private: the keys feed DP mechanisms
-- only): {values} gives per task the value a row contributes (v<i>, NULL when the row does not
-- count), {keys} the group key k<i> computed from it. Kept in a temporary table for the
-- grouping query (grouping sets over the expressions directly evaluated them once per set).
CREATE OR REPLACE TEMP TABLE {keys_table} AS SELECT {keys} FROM (SELECT {values} FROM {source})

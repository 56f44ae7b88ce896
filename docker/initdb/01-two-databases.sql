-- The two databases of scenario two_databases (seeds 000 and 002): users in
-- one, favorite colors and cheeses in the other. The scenario recreates
-- them with its schema on each run.
CREATE DATABASE txjoin_two_databases_accounts;
CREATE DATABASE txjoin_two_databases_prefs;

-- Database 1 (seeds 000 and 002): users and their accounts.
create table users (uid text primary key, account_id text not null, full_name text);
insert into users values
  ('100-1', '100', 'susan smith'),
  ('100-2', '100', 'peter jones'),
  ('101-1', '101', 'ana lima');

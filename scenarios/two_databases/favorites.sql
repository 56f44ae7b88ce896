-- Database 2: favorite colors and cheeses, keyed by the user's uid.
create table user_favorite_color (user_uid text primary key, favorite_color text);
create table user_favorite_cheese (user_uid text primary key, favorite_cheese text);
insert into user_favorite_color values ('100-1', 'blue');
insert into user_favorite_cheese values ('100-1', 'cheddar');

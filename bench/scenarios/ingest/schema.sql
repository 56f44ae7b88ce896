-- Throughput benchmark: order inserts joined with their clients.
create table clients (id int primary key, name text not null, region text not null);
create table orders (id bigserial primary key, client_id int not null, amount int not null, note text);

insert into clients select g, 'client ' || g, 'region ' || g % 7 from generate_series(1, 1000) g;

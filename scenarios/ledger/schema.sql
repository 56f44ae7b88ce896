-- Zero-sum transfers between accounts: the "internal consistency" study.
create table owners (id int primary key, name text not null);
create table accounts (id int primary key, owner_id int not null references owners (id), balance bigint not null);

insert into owners select g, 'owner ' || g from generate_series(1, 10) g;
insert into accounts select g, 1 + g % 10, 1000 from generate_series(1, 50) g;
